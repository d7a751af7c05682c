#!/usr/bin/env bash
# Installs Debian's Chromium for the browser test of the Checkpoints page
# (tests/airflow/test_checkpoints_page.py). Idempotent: does nothing when
# /usr/bin/chromium is already there. Needs root (or sudo) and apt-get.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-chromium: apt-get not found; install Chromium with your package manager" >&2
    exit 1
fi
SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-chromium: run as root or install sudo" >&2; exit 1; }
    SUDO="sudo"
fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
/usr/bin/chromium --version
