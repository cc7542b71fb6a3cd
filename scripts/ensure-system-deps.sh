#!/bin/sh
# The system packages `make test` needs beyond Python: Debian's headless Chromium and its
# chromedriver, for the explorer's browser test (tests/functional/test_explorer.py), and FUSE 3
# (fuse3's fusermount3 and the libfuse3-3 library mfusepy loads), for the power-loss tests
# (tests/powerloss/).
# Present: does nothing (quick). Missing, as root with apt-get: installs them. Missing otherwise
# (not root, no apt-get, or the install failed): prints one line saying what is missing and how to
# install it, and exits 0; the tests that need them then skip with the same reason (fail when CI
# is set).
# docs/architecture.md, "System packages", records this decision.
set -u

has_libfuse3() {
    { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libfuse3\.so\.3 '
}

missing_packages() {
    command -v chromium >/dev/null 2>&1 || printf ' chromium'
    command -v chromedriver >/dev/null 2>&1 || printf ' chromium-driver'
    command -v fusermount3 >/dev/null 2>&1 || printf ' fuse3'
    has_libfuse3 || printf ' libfuse3-3'
}

missing=$(missing_packages)
[ -z "$missing" ] && exit 0
users="(explorer browser test: chromium*; power-loss tests: fuse3, libfuse3-3)"

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system-deps: installing Debian packages:$missing $users"
    # shellcheck disable=SC2086  # $missing is a list of package names
    if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null \
        && [ -z "$(missing_packages)" ]; then
        exit 0
    fi
    echo "ensure-system-deps: apt-get could not install:$missing; the tests that need them" \
        "will skip $users" >&2
    exit 0
fi

echo "ensure-system-deps: missing Debian packages:$missing; install with" \
    "'sudo apt-get install$missing'; the tests that need them will skip $users" >&2
exit 0
