#!/bin/sh
# saint-closure [--exclude ERE] OUT ITEM...: copies into OUT what a distroless image needs to run the
# given Debian packages' programs: each package's files (without documentation,
# manuals, translations or shell completions), each absolute path given as is, and
# every shared library their ELF files load, as `ldd` resolves it here. Paths matching
# the --exclude extended regular expression are left out before the libraries are
# resolved (so what only they load is left out too).
#
# Runs inside a Debian stage where the packages are installed: in Docker (a stage of
# porter-sidecar/Dockerfile) and in the offline build's chroot of the same stage
# (e2e/images/saint_images.py), so both produce the same tree. POSIX sh: the stage
# is debian:*-slim. Libraries land at the path ldd prints, as regular files, so the
# tree needs no /lib -> usr/lib link of its own and merges into any base.
set -eu

exclude='^$'
if [ "${1:-}" = --exclude ]; then
	exclude=$2
	shift 2
fi
if [ "$#" -lt 2 ]; then
	echo "usage: saint-closure [--exclude ERE] OUT PACKAGE|/ABSOLUTE/PATH..." >&2
	exit 2
fi
out=$1
shift
mkdir -p "$out"
files=$(mktemp)
trap 'rm -f "$files"' EXIT

for item in "$@"; do
	case $item in
	/*)
		[ -e "$item" ] || { echo "saint-closure: $item does not exist" >&2; exit 1; }
		find "$item" >>"$files"
		;;
	*)
		dpkg -L "$item" >/dev/null 2>&1 || { echo "saint-closure: package $item is not installed" >&2; exit 1; }
		# dpkg -L lists directories too (tar keeps their modes); "/." and diversion notes are not paths.
		dpkg -L "$item" | grep '^/' | grep -v -x '/\.' \
			| grep -v -E '^/usr/share/(doc|doc-base|man|info|locale|lintian|bash-completion|zsh|fish)(/|$)' >>"$files"
		;;
	esac
done

# One tar keeps hard links (git's builtins are links to one file) and symbolic links.
sort -u "$files" | grep -v -E "$exclude" | sed 's|^/||' | tar -C / --no-recursion -cf - -T - | tar -C "$out" -xpf -

# The libraries: ldd on every regular file that is an ELF object. dash has no
# pipefail, so the list goes through a file and a missing library is checked there.
libraries=$(mktemp)
trap 'rm -f "$files" "$libraries"' EXIT
find "$out" -type f | while read -r path; do
	system_path=/${path#"$out"/}
	magic=$(head -c 4 "$system_path" | od -An -c | tr -d ' ')
	[ "$magic" = '177ELF' ] || continue
	ldd "$system_path" 2>/dev/null || true
done >"$libraries"
if grep -q 'not found' "$libraries"; then
	echo "saint-closure: libraries are missing:" >&2
	grep 'not found' "$libraries" | sort -u >&2
	exit 1
fi
sed -n -e 's|.*=> \(/[^ ]*\) (.*|\1|p' -e 's|^[[:space:]]*\(/[^ ]*\) (.*|\1|p' "$libraries" | sort -u \
	| while read -r library; do
		mkdir -p "$out$(dirname "$library")"
		cp -L "$library" "$out$library"
	done
