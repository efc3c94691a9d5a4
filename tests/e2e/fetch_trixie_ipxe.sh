#!/usr/bin/env bash
# Fetch Debian trixie's ipxe package (arch all) with apt, without adding trixie
# to the system's sources: a private apt state/cache/sources under $DEST/apt.
# Unpacks it into $DEST/root; prints the directory holding ipxe.efi/snponly.efi.
#
# Why: the e2e tests boot an iPXE ISO as virtual media, and Debian 12's iPXE
# (2019) cannot run autoexec.ipxe from the medium it booted from; trixie's
# (2025) can. Usage: tests/e2e/fetch_trixie_ipxe.sh [DEST]
#   DEST defaults to $METALBOOT_E2E_CACHE or ~/.cache/metalboot-e2e.
set -euo pipefail

DEST="${1:-${METALBOOT_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metalboot-e2e}}"
MIRROR="${METALBOOT_E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
OUT="$DEST/ipxe-trixie"
IPXE_DIR="$OUT/root/usr/lib/ipxe"

if [ -s "$IPXE_DIR/ipxe.efi" ] && [ -s "$IPXE_DIR/snponly.efi" ]; then
    echo "$IPXE_DIR"
    exit 0
fi

APT="$OUT/apt"
mkdir -p "$APT/etc/preferences.d" "$APT/etc/apt.conf.d" "$APT/state/lists/partial" \
         "$APT/cache/archives/partial" "$OUT/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie main" \
    > "$APT/etc/sources.list"
: > "$APT/state/status"
opts=(
    -o "Dir::Etc::SourceList=$APT/etc/sources.list"
    -o "Dir::Etc::SourceParts=-"
    -o "Dir::Etc::Parts=$APT/etc/apt.conf.d"
    -o "Dir::Etc::PreferencesParts=$APT/etc/preferences.d"
    -o "Dir::State=$APT/state"
    -o "Dir::State::status=$APT/state/status"
    -o "Dir::Cache=$APT/cache"
    -o "APT::Architecture=amd64"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
)
apt-get "${opts[@]}" -qq update >&2
( cd "$OUT/debs" && apt-get "${opts[@]}" -qq download ipxe >&2 )
deb=$(ls "$OUT"/debs/ipxe_*_all.deb | tail -n 1)
rm -rf "$OUT/root"
dpkg-deb -x "$deb" "$OUT/root"
for f in ipxe.efi snponly.efi; do
    [ -s "$IPXE_DIR/$f" ] || { echo "fetch_trixie_ipxe: $deb has no $f" >&2; exit 1; }
done
echo "fetched $(basename "$deb")" >&2
echo "$IPXE_DIR"
