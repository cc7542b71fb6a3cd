#!/bin/sh
# The system packages `make test` needs beyond Python: Debian's headless Chromium and its
# chromedriver, for the explorer's browser test (tests/functional/test_explorer.py).
# Present: does nothing (quick). Missing, as root with apt-get: installs them. Missing otherwise
# (not root, no apt-get, or the install failed): prints one line saying what is missing and how to
# install it, and exits 0; the browser test then skips with the same reason (fails when CI is set).
# docs/architecture.md, "System packages", records this decision.
set -u

missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v chromedriver >/dev/null 2>&1 || missing="$missing chromium-driver"
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system-deps: installing Debian packages:$missing (browser test of the explorer)"
    # shellcheck disable=SC2086  # $missing is a list of package names
    if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null \
        && command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        exit 0
    fi
    echo "ensure-system-deps: apt-get could not install:$missing; the explorer browser test will skip" >&2
    exit 0
fi

echo "ensure-system-deps: missing Debian packages:$missing; install with" \
    "'sudo apt-get install chromium chromium-driver'; the explorer browser test will skip" >&2
exit 0
