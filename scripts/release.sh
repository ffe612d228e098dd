#!/usr/bin/env bash
# Writes a release of skewwatch that anyone can check against its source:
#
#   scripts/release.sh
#
# into target/dist/:
#   skewwatch-<version>-x86_64-linux-gnu.tar.gz   the binary (the image's, built by
#       scripts/build-image.sh), the default configuration (skewwatch.yaml), rules/,
#       dashboards/, deploy/kubernetes/ and the SBOM, under one directory
#   skewwatch-<version>.cdx.json                   the SBOM of the binary's crates (CycloneDX)
#   skewwatch-<version>.oci.tar                    the container image (OCI archive)
#   SHA256SUMS                                     sha256sum of the three
#
# The tarball is reproducible like the image: sorted names, every mtime SOURCE_DATE_EPOCH
# (default: the commit's date), root as owner, gzip without a name or time stamp. So are the
# checksums: `sha256sum -c SHA256SUMS` in target/dist/ verifies a download, and a second run of
# this script on the same commit gives the same file. The binary is dynamically linked
# against glibc (2.36 on the Debian 12 build machine) and needs that or newer.
#
# Environment: those of scripts/build-image.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

digest=$(scripts/build-image.sh)
image=$root/target/image
version=$(python3 -c 'import tomllib
print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)
fi
name=skewwatch-$version-x86_64-linux-gnu
dist=$root/target/dist
stage=$dist/stage/$name
rm -rf "$dist"
mkdir -p "$stage/deploy"

install -m 0755 "$image/context/rootfs/usr/bin/skewwatch" "$stage/skewwatch"
install -m 0644 rules/skewwatch.yaml "$stage/skewwatch.yaml"
install -m 0644 "$image/skewwatch.cdx.json" "$stage/skewwatch.cdx.json"
# Only what git tracks, so a stray local file never ships.
git ls-files -z rules dashboards deploy/kubernetes deploy/image README.md \
  | xargs -0 -I{} install -D -m 0644 {} "$stage/{}"
printf '%s\n' "skewwatch $version" "image $digest" >"$stage/RELEASE"
"$stage/skewwatch" --version >>"$stage/RELEASE"

tar --create --directory "$dist/stage" --sort=name --format=gnu \
  --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --mode=u+w,go-w,a+rX \
  "$name" | gzip -9 --no-name >"$dist/$name.tar.gz"
rm -rf "$dist/stage"
cp "$image/skewwatch.cdx.json" "$dist/skewwatch-$version.cdx.json"
cp "$image/skewwatch.oci.tar" "$dist/skewwatch-$version.oci.tar"
(cd "$dist" && sha256sum "$name.tar.gz" "skewwatch-$version.cdx.json" \
  "skewwatch-$version.oci.tar" >SHA256SUMS)
cat "$dist/SHA256SUMS"
