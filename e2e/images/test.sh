#!/usr/bin/env bash
# Tests the images and their Dockerfiles (e2e/images/test_images.py says what): builds
# them with build.sh (seconds when its cache is warm), then runs the checks on the
# archives. Needs root, like build.sh. `e2e/images/test.sh -k Dockerfiles` runs only
# the matching tests (unittest's -k).
set -euo pipefail

images_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v skopeo >/dev/null 2>&1 || ! command -v containerd >/dev/null 2>&1 || ! command -v ctr >/dev/null 2>&1; then
	echo "images test: installing skopeo and containerd (Debian packages)" >&2
	apt-get install -y --no-install-recommends skopeo containerd >&2 \
		|| { apt-get update >&2 && apt-get install -y --no-install-recommends skopeo containerd >&2; } \
		|| { echo "images test: failed to install skopeo and containerd" >&2; exit 1; }
fi

# Debian's registry (distribution 2.8) for the push check, unpacked from its .deb into
# the cache rather than installed: installing would start it as a system service.
registry_binary() {
	local version directory deb
	version="$(apt-cache policy docker-registry 2>/dev/null | sed -n 's/^ *Candidate: //p')"
	if [[ -z "$version" || "$version" == "(none)" ]]; then
		apt-get update >&2 || { echo "images test: apt-get update failed" >&2; return 1; }
		version="$(apt-cache policy docker-registry | sed -n 's/^ *Candidate: //p')"
	fi
	directory="${SAINT_CACHE_DIR:-$HOME/.cache/saint}/docker-registry-${version//[:~+]/_}"
	if [[ ! -x "$directory/usr/bin/docker-registry" ]]; then
		rm -rf "$directory.partial" && mkdir -p "$directory.partial"
		(cd "$directory.partial" && apt-get download -o APT::Sandbox::User=root "docker-registry=$version" >&2) \
			|| { echo "images test: apt-get download docker-registry=$version failed" >&2; return 1; }
		deb="$(echo "$directory.partial"/docker-registry_*.deb)"
		dpkg -x "$deb" "$directory.partial" && rm -f "$deb" && rm -rf "$directory" && mv "$directory.partial" "$directory"
	fi
	echo "$directory/usr/bin/docker-registry"
}

SAINT_REGISTRY_BINARY="$(registry_binary)"
SAINT_IMAGES_DIR="$("$images_dir/build.sh" --print-dir)"
export SAINT_IMAGES_DIR SAINT_REGISTRY_BINARY
exec python3 "$images_dir/test_images.py" "$@"
