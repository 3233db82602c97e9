#!/usr/bin/env bash
# Builds Saint's images (operator, agent, porter, sandbox) as OCI archives, without a
# Docker engine or a registry:
#
#   e2e/images/build.sh [--output DIR] [--repository-prefix REGISTRY/PATH] [--print-dir]
#                       [--import-k3s] [NAME...]
#   e2e/images/build.sh --stages-only [NAME...]   only the cached Debian stages (no cargo)
#
# --import-k3s then imports each archive into this machine's k3s (`k3s ctr images
# import`), so a single-node k3s runs the chart's defaults with no registry.
#
# Writes <dir>/saint-<name>-<appVersion>.oci.tar whose index names
# <prefix>/saint-<name>:<appVersion> (prefix ghcr.io/saint-work unless given;
# appVersion from charts/saint/Chart.yaml). Default <dir>: ~/.cache/saint/images-<hash>/,
# the hash covering every input (binaries, Dockerfiles, files they copy, this
# directory), so a warm run only checks. Logs go to stderr; with --print-dir the
# directory is the only line on stdout.
#
# Each image's Dockerfile is the definition this reads (e2e/images/saint_images.py):
# the cargo stage is the cargo command below; Debian stages run their RUN lines in a
# debootstrap chroot (cached under ~/.cache/saint/rootfs-*.tar); the distroless base is
# the binaries' libraries, CA certificates and passwd/group. Needs root (chroot,
# debootstrap, file owners) and Debian's umoci and debootstrap, installed when missing.
#
# SAINT_IMAGES_FROM_TEST_BUILD=1 takes the binaries of the workspace's test build
# (e2e/test-build.sh, dev profile) instead of the release profiles: what ./test.sh's
# node section runs. Images to ship are built without it.
#
# Push to a registry:  skopeo copy oci-archive:<dir>/saint-agent-0.1.0.oci.tar docker://<registry>/saint-agent:0.1.0
# Import into containerd:  ctr -n k8s.io images import --all-platforms <dir>/saint-agent-0.1.0.oci.tar
set -euo pipefail

images_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repository_root="$(cd "$images_dir/../.." && pwd)"
cache_dir="${SAINT_CACHE_DIR:-$HOME/.cache/saint}"
# Release binaries only ever go here (debug builds use ~/.cache/saint/target).
release_target_dir="${SAINT_RELEASE_TARGET_DIR:-$cache_dir/target-release}"

usage() {
	sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

die() {
	echo "images: $*" >&2
	exit 1
}

# install_missing COMMAND:PACKAGE...: apt-get installs the packages whose command is absent.
install_missing() {
	local entry command package missing=()
	for entry in "$@"; do
		command="${entry%%:*}"
		package="${entry#*:}"
		command -v "$command" >/dev/null 2>&1 || missing+=("$package")
	done
	((${#missing[@]} == 0)) && return 0
	echo "images: installing ${missing[*]} (Debian packages)" >&2
	if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
		apt-get update >&2 || die "apt-get update failed"
		apt-get install -y --no-install-recommends "${missing[@]}" >&2 || die "failed to install ${missing[*]}"
	fi
}

# The chart's appVersion: the tag of every image.
app_version() {
	local version
	version="$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' "$repository_root/charts/saint/Chart.yaml")"
	[[ -n "$version" ]] || die "no appVersion in charts/saint/Chart.yaml"
	echo "$version"
}

image_binaries=(saint-operator saint-agent saint-embedder porter saint-sandbox-runner)

# The binaries every image takes, stripped into $1: the release build (cargo is a
# no-op when warm), or with SAINT_IMAGES_FROM_TEST_BUILD=1 the workspace's test build
# (e2e/test-build.sh), which ./test.sh has already compiled for its other sections.
build_binaries() {
	local destination="$1" binary
	mkdir -p "$destination"
	if [[ "${SAINT_IMAGES_FROM_TEST_BUILD:-0}" == 1 ]]; then
		local paths index=0
		mapfile -t paths < <(bash "$repository_root/e2e/test-build.sh" --bin "${image_binaries[@]}") ||
			die "the test build has not every binary (${image_binaries[*]})"
		((${#paths[@]} == ${#image_binaries[@]})) || die "the test build printed ${#paths[@]} of ${#image_binaries[@]} binaries"
		for binary in "${image_binaries[@]}"; do
			strip -o "$destination/$binary" "${paths[index]}" || die "failed to strip $binary"
			index=$((index + 1))
		done
		echo "images: binaries from the test build (dev profile), not the release profiles" >&2
		return 0
	fi
	# sudo resets PATH, so a toolchain installed by rustup for the calling user is
	# not found: say how to pass it rather than failing inside the subshell.
	command -v cargo > /dev/null ||
		die "cargo is not on the PATH${SUDO_USER:+ sudo gave root}; pass your toolchain: sudo env \"PATH=\$PATH\" \"RUSTUP_HOME=\${RUSTUP_HOME:-\$HOME/.rustup}\" e2e/images/build.sh ..."
	(
		cd "$repository_root"
		CARGO_TARGET_DIR="$release_target_dir" cargo build --locked --release \
			-p saint-agent --bin saint-agent \
			-p saint-memory --bin saint-embedder \
			-p porter --bin porter \
			-p saint-sandbox-runner --bin saint-sandbox-runner >&2
		# The operator has its own profile (Cargo.toml: built for size), as in its Dockerfile.
		CARGO_TARGET_DIR="$release_target_dir" cargo build --locked --profile operator \
			-p saint-operator --bin saint-operator >&2
	) || die "cargo build --release failed"
	local built
	for binary in "${image_binaries[@]}"; do
		built="$release_target_dir/release/$binary"
		[[ "$binary" == saint-operator ]] && built="$release_target_dir/operator/$binary"
		[[ -x "$built" ]] || die "cargo built no $built"
		strip -o "$destination/$binary" "$built" || die "failed to strip $binary"
	done
}

main() {
	local output="" prefix="" print_dir=false stages_only=false import_k3s=false names=()
	while (($# > 0)); do
		case "$1" in
		--output) output="${2:?--output needs a directory}"; shift 2 ;;
		--output=*) output="${1#*=}"; shift ;;
		--repository-prefix) prefix="${2:?--repository-prefix needs a value}"; shift 2 ;;
		--repository-prefix=*) prefix="${1#*=}"; shift ;;
		--print-dir) print_dir=true; shift ;;
		--import-k3s) import_k3s=true; shift ;;
		--stages-only) stages_only=true; shift ;;
		-h | --help) usage ;;
		-*) echo "images: unknown option $1" >&2; usage ;;
		*) names+=("$1"); shift ;;
		esac
	done
	local name
	for name in "${names[@]}"; do
		[[ " operator agent porter sandbox " == *" $name "* ]] || die "unknown image '$name'; the images are operator agent porter sandbox"
	done
	[[ "$(id -u)" == 0 ]] || die "needs root: debootstrap, chroot and the images' file owners (run with sudo)"
	install_missing umoci:umoci debootstrap:debootstrap strip:binutils python3:python3 unshare:util-linux
	# debootstrap checks Debian's signatures with it (Ubuntu hosts lack it by default).
	if [[ ! -e /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
		apt-get install -y --no-install-recommends debian-archive-keyring >&2 \
			|| die "failed to install debian-archive-keyring (debootstrap needs it)"
	fi

	if [[ "$stages_only" == true ]]; then
		python3 "$images_dir/saint_images.py" stages --cache "$cache_dir" "${names[@]}" ||
			die "building the Debian stages failed (see above)"
		return 0
	fi

	local work binaries started=$SECONDS directory
	mkdir -p "$cache_dir"
	work="$(mktemp -d "${TMPDIR:-/tmp}/saint-images.XXXXXX")"
	# shellcheck disable=SC2064 # the path is fixed now
	trap "rm -rf '$work'" EXIT
	binaries="$work/binaries"
	build_binaries "$binaries"

	local arguments=(build --binaries "$binaries" --cache "$cache_dir" --work "$work" --version "$(app_version)")
	[[ -n "$output" ]] && arguments+=(--output "$output")
	[[ -n "$prefix" ]] && arguments+=(--repository-prefix "${prefix%/}")
	directory="$(python3 "$images_dir/saint_images.py" "${arguments[@]}" "${names[@]}")" || die "the image build failed (see above)"
	echo "images: ${names[*]:-all images} ready in $directory ($((SECONDS - started)) s)" >&2
	if [[ "$import_k3s" == true ]]; then
		command -v k3s > /dev/null || die "--import-k3s: no k3s on this machine's PATH"
		local archive
		for archive in "$directory"/saint-*.oci.tar; do
			echo "images: importing $archive into k3s" >&2
			k3s ctr images import "$archive" >&2 || die "k3s ctr images import $archive failed"
		done
	fi
	if [[ "$print_dir" == true ]]; then
		echo "$directory"
	fi
}

main "$@"
