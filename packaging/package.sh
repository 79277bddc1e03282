#!/usr/bin/env bash
# Builds dist/: linux and darwin tarballs (amd64, arm64), .deb and .rpm for
# linux (amd64, arm64) with nfpm, and a Homebrew formula. Run by make package.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VERSION:-0.0.0}
VERSION=${VERSION#v}
NFPM=${NFPM:-github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.43.0}
DIST=dist
rm -rf "$DIST" && mkdir -p "$DIST"
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${target%/*} arch=${target#*/}
	out="$DIST/$os-$arch"
	mkdir -p "$out"
	# memwatchd: every command; memwatch: recall, show and version, lean,
	# the rest by running memwatchd beside it; memwatch-search: a search
	# no daemon answers.
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$out/memwatchd" ./cmd/memwatchd
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$out/memwatch-search" ./cmd/memwatch-search
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$out/memwatch" ./cmd/memwatch
	cp -r README.md LICENSE docs packaging/policy.d/example.yaml "$out/"
	tar -C "$out" -czf "$DIST/memwatch_${VERSION}_${os}_${arch}.tar.gz" memwatch memwatchd memwatch-search README.md LICENSE docs example.yaml
done
# Man pages and shell completions, generated from the commands themselves
# (gen-docs is built in only with -tags gendocs: see cmd/memwatchd/gendocs.go).
go run -tags gendocs -ldflags "-X main.version=$VERSION" ./cmd/memwatchd gen-docs "$DIST/docs" >/dev/null
gzip -9n "$DIST"/docs/man1/*.1
"$DIST/linux-$(go env GOARCH)/memwatch" install --print --packaged --policy /etc/memwatch/policy.d > "$DIST/memwatch.service"
for arch in amd64 arm64; do
	for fmt in deb rpm; do
		sed -e "s|\${GOARCH}|$arch|g" -e "s|\${VERSION}|$VERSION|g" -e "s|\${DIST}|$DIST|g" packaging/nfpm.yaml > "$DIST/nfpm-$arch.yaml"
		go run "$NFPM" package --config "$DIST/nfpm-$arch.yaml" --packager "$fmt" --target "$DIST/"
	done
done
sha() { sha256sum "$DIST/memwatch_${VERSION}_darwin_$1.tar.gz" | cut -d' ' -f1; }
sed -e "s/@VERSION@/$VERSION/g" -e "s/@SHA256_DARWIN_ARM64@/$(sha arm64)/" -e "s/@SHA256_DARWIN_AMD64@/$(sha amd64)/" \
	packaging/homebrew/memwatch.rb.tmpl > "$DIST/memwatch.rb"
ls -l "$DIST"
