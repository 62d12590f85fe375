# Shared by up.sh and image.sh (sourced, not run).

# apt_install_missing PKG...: install those of the Debian packages that are not installed yet and
# print their names (nothing when all were there). Each step is checked explicitly because callers
# capture the output with $(...), where `set -e` does not apply.
apt_install_missing() {
  local need=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [ ${#need[@]} -gt 0 ] || return 0
  apt-get update -qq >&2 || return 1
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || return 1
  echo "${need[*]}"
}
