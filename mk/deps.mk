# SPDX-License-Identifier: Apache-2.0
# make deps: the Debian 12 packages every build and test needs, installed with apt-get.

##@ Setting up

DEB_PKGS := build-essential pkg-config libuv1-dev libc-ares-dev libssl-dev libtomlplusplus-dev libfmt-dev nlohmann-json3-dev \
	libsystemd-dev libbenchmark-dev libgtest-dev libgmock-dev openssl curl mandoc prometheus python3 python3-yaml \
	debhelper dpkg-dev fakeroot buildah clang libclang-rt-dev llvm iptables iproute2 systemd-container debootstrap \
	golang-go golang-golang-x-net-dev python3-kubernetes haproxy etcd-server etcd-client nginx libnginx-mod-stream \
	podman runc catatonit
.PHONY: deps
deps: ## apt-get install every build and test dependency (with sudo unless root)
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_PKGS)

# The arm64 cross build and its tests under qemu-user (`make arm64`, `make test-arm64`): Debian's
# cross compiler and qemu-user-static, and the :arm64 -dev packages from the arm64 architecture
# added to dpkg (multiarch; they install beside the amd64 ones, same versions, nothing replaced).
# toml++ and nlohmann-json are used header-only: the cross compiler reads their headers from
# /usr/include, where `make deps` put them. libc-ares-dev:arm64: c-ares, the hostname resolver.
DEB_PKGS_ARM64 := g++-aarch64-linux-gnu qemu-user-static libuv1-dev:arm64 libssl-dev:arm64 libfmt-dev:arm64 \
	libgtest-dev:arm64 libgmock-dev:arm64 libc-ares-dev:arm64
.PHONY: deps-arm64
deps-arm64: ## dpkg --add-architecture arm64, apt-get install the cross compiler, qemu-user-static and the :arm64 -dev packages
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO dpkg --add-architecture arm64 && $$SUDO apt-get update && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_PKGS_ARM64)
