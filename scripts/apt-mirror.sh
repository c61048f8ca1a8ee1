# Sourced by deps.sh, platforms.sh and image.sh: package mirrors come from
# this machine's own apt configuration (whatever format or local mirror it
# uses), never from an address written here.

# apt_repo_uri SUITE : the URI of the configured repository serving SUITE.
apt_repo_uri() {
  apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Identifier: Packages' 2>/dev/null \
    | awk -v s="$1" '$1 == s { print $2; exit }'
}

# The Debian archive: the repository that serves this machine's release.
debian_archive_uri() {
  . /etc/os-release
  local u
  u="$(apt_repo_uri "${VERSION_CODENAME:-}")"
  if [ -z "$u" ]; then
    echo "apt-mirror.sh: no apt source serves ${VERSION_CODENAME:-this release}; run apt-get update" >&2
    return 1
  fi
  echo "$u"
}

# Debian's security archive, if configured (empty otherwise).
debian_security_uri() {
  . /etc/os-release
  apt_repo_uri "${VERSION_CODENAME:-}-security"
}

# apt_fetch_from URI SUITE DIR PKG... : downloads PKG .debs from URI SUITE
# main into DIR through a throwaway apt configuration that never touches the
# system's sources, lists or status.
apt_fetch_from() {
  local uri="$1" suite="$2" dir="$3"; shift 3
  local apt="$dir/.apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc"
  echo "deb $uri $suite main" >"$apt/etc/sources.list"
  : >"$apt/status"
  local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
              -o "Dir::State::Status=$apt/status" -o "Dir::Etc::Preferences=/dev/null"
              -o "Dir::Etc::PreferencesParts=/dev/null" -o "APT::Get::List-Cleanup=0"
              -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" update -qq
  (cd "$dir" && apt-get "${opts[@]}" download "$@" >/dev/null)
}
