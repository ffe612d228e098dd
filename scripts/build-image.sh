#!/usr/bin/env bash
# Builds skewwatch's container image from source and writes it as an OCI archive:
#
#   scripts/build-image.sh          # prints the image digest (sha256:...) on stdout
#
# Writes target/image/skewwatch.oci.tar (the image, named $IMAGE_NAME:<version>) and
# target/image/skewwatch.cdx.json (the SBOM that is also in the image). The image is built by
# `podman build` from deploy/image/Containerfile, FROM scratch: nothing is pulled.
#
# Reproducible: two runs on one commit give the same digest. Every timestamp is
# SOURCE_DATE_EPOCH (default: the commit's date), file owners and modes are fixed, the layers
# are built from sorted, staged directories, and the binary embeds only the commit and that
# date (agent/build.rs). Its DWARF debug information is removed, since it names the directory
# the build ran in; the symbol table stays, so backtraces keep function names.
#
# Environment: SOURCE_DATE_EPOCH; IMAGE_NAME (default localhost/skewwatch); SKEWWATCH_BIN (a
# release binary of this commit; default: `cargo build --release --locked -p skewwatch`);
# CARGO_TARGET_DIR. Needs podman, python3, objcopy, ldd, and cargo-cyclonedx (pinned in
# .ci/run: cargo install --locked cargo-cyclonedx --version 0.5.9).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

IMAGE_NAME=${IMAGE_NAME:-localhost/skewwatch}
out=$root/target/image
ctx=$out/context

for tool in podman python3 objcopy ldd cargo-cyclonedx; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool not found (see the header of $0)" >&2; exit 1; }
done

# --- what is being built ------------------------------------------------------------------
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 \
  && [ "$(git rev-parse --show-toplevel)" = "$root" ]; then
  revision=$(git rev-parse HEAD)
  commit_epoch=$(git log -1 --format=%ct HEAD)
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "build-image: the work tree has uncommitted changes; the image is labelled $revision all the same" >&2
  fi
else
  revision=unknown
  commit_epoch=
fi
epoch=${SOURCE_DATE_EPOCH:-$commit_epoch}
[ -n "$epoch" ] || { echo "build-image: not a git checkout: set SOURCE_DATE_EPOCH" >&2; exit 1; }
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
# Version, licence and source URL: the workspace's package values, which the crates inherit.
read -r version licenses source < <(python3 -c 'import tomllib
p = tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]
print(p["version"], p["license"], p["repository"])')
tag=$IMAGE_NAME:$version

# --- the binary ---------------------------------------------------------------------------
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/usr/bin" "$ctx/rootfs/etc/skewwatch" "$ctx/rootfs/usr/share/doc/skewwatch"
bin=$ctx/rootfs/usr/bin/skewwatch
if [ -z "${SKEWWATCH_BIN:-}" ]; then
  # SOURCE_DATE_EPOCH reaches build.rs only when the caller set it: unset, build.rs takes the
  # same commit date, and the build shares its artifacts with `cargo test --release`.
  cargo build --release --locked -p skewwatch >&2
  SKEWWATCH_BIN=${CARGO_TARGET_DIR:-$root/target}/release/skewwatch
fi
# Copied at once: a shared target directory may be rebuilt by another checkout.
cp "$SKEWWATCH_BIN" "$bin.tmp"
objcopy --strip-debug "$bin.tmp" "$bin"
rm "$bin.tmp"
built=$("$bin" --version)
expected="skewwatch $version (commit $revision, built $created)"
if [ "$built" != "$expected" ]; then
  echo "build-image: $SKEWWATCH_BIN says '$built', expected '$expected' (another commit, or SOURCE_DATE_EPOCH differs)" >&2
  exit 1
fi

# --- what the binary runs on: its shared libraries and the /etc of name resolution -------
# Each library at the path the dynamic loader looks for it, the loader at the path the
# binary names (its PT_INTERP); the copyright files of the Debian packages they come from.
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
for lib in $libs; do
  install -D -m 0755 "$(readlink -f "$lib")" "$ctx/rootfs$lib"
  pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1) || pkg=
  if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
    install -D -m 0644 "/usr/share/doc/$pkg/copyright" "$ctx/rootfs/usr/share/doc/$pkg/copyright"
  fi
done
etc=$ctx/rootfs/etc
mkdir -p "$etc"
# User and group 65532 (nonroot, as distroless images name it); no login shell exists.
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$etc/group"
# glibc (2.34 and later) has the files and dns NSS modules built in: no libnss_* to ship.
printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$etc/nsswitch.conf"
# Container runtimes and the kubelet mount their own /etc/hosts and /etc/resolv.conf over these.
printf '%s\n' '127.0.0.1 localhost' '::1 localhost ip6-localhost ip6-loopback' >"$etc/hosts"
: >"$etc/resolv.conf"

# --- skewwatch: the binary, the default configuration, the SBOM --------------------------
install -m 0644 rules/skewwatch.yaml "$ctx/rootfs/etc/skewwatch/skewwatch.yaml"
sbom=$out/skewwatch.cdx.json
# cargo-cyclonedx writes beside the package's Cargo.toml; SOURCE_DATE_EPOCH fixes its
# timestamp. It resolves features across the whole workspace, dev-dependencies included, so
# it lists crates that never reach the binary: only those `cargo tree` shows in the binary's
# normal dependency graph are kept (build scripts' dependencies are left out by both).
rm -f agent/skewwatch_bin.cdx.json
(cd agent && SOURCE_DATE_EPOCH=$epoch cargo cyclonedx --quiet --format json --spec-version 1.5 \
  --describe binaries --no-build-deps --target x86_64-unknown-linux-gnu)
mv agent/skewwatch_bin.cdx.json "$out/cyclonedx.raw.json"
cargo tree --locked -p skewwatch -e normal --prefix none --target x86_64-unknown-linux-gnu \
  | awk '{ print $1 "@" substr($2, 2) }' | sort -u >"$out/crates.txt"
python3 - "$out/cyclonedx.raw.json" "$out/crates.txt" "$root" "$sbom" <<'EOF'
import json, sys
raw, crates, root, dest = sys.argv[1:]
keep = set(open(crates).read().split())
bom = json.load(open(raw))
def named(c):
    return f"{c['name']}@{c['version']}" in keep
bom["components"] = [c for c in bom["components"] if named(c)]
refs = {c["bom-ref"] for c in bom["components"]} | {bom["metadata"]["component"]["bom-ref"]}
bom["dependencies"] = [
    dict(d, dependsOn=[r for r in d.get("dependsOn", []) if r in refs])
    for d in bom["dependencies"] if d["ref"] in refs
]
# The workspace's own crates are named by their absolute path: make it the same everywhere.
text = json.dumps(bom, indent=2, sort_keys=True) + "\n"
text = text.replace(f"path+file://{root}/", "path+file:///skewwatch/")
open(dest, "w").write(text)
print(len(bom["components"]), file=sys.stderr)
EOF
install -m 0644 "$sbom" "$ctx/rootfs/usr/share/doc/skewwatch/skewwatch.cdx.json"

# Fixed modes (the checkout's umask must not matter); podman's --timestamp fixes every mtime
# and COPY makes root the owner.
find "$ctx" -type d -exec chmod 0755 {} +

# --- the image ----------------------------------------------------------------------------
podman build --quiet --layers=false --no-cache --pull=never --identity-label=false --format oci \
  --timestamp "$epoch" --file deploy/image/Containerfile --tag "$tag" \
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
  --build-arg "SOURCE=$source" --build-arg "LICENSES=$licenses" \
  --build-arg "CREATED=$created" \
  "$ctx" >/dev/null
layout=$out/layout
rm -rf "$layout" "$out/skewwatch.oci.tar"
mkdir -p "$layout"
podman save --quiet --format oci-archive --output "$out/saved.tar" "$tag"
podman rmi --force "$tag" >/dev/null
# podman writes the archive's own entries with the current time; rewritten with fixed times
# and sorted names, the archive file is as reproducible as the image (same sha256sum).
tar -xf "$out/saved.tar" -C "$layout"
rm "$out/saved.tar"
tar --create --file "$out/skewwatch.oci.tar" --directory "$layout" --sort=name --format=gnu \
  --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX \
  oci-layout index.json blobs
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' \
  "$layout/index.json"
