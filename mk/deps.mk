# SPDX-License-Identifier: Apache-2.0
# make deps: the Debian 12 packages every build and test needs, installed with apt-get.

##@ Setting up

DEB_PKGS := build-essential pkg-config libuv1-dev libc-ares-dev libssl-dev libtomlplusplus-dev libfmt-dev nlohmann-json3-dev \
	libsystemd-dev libbenchmark-dev libgtest-dev libgmock-dev openssl curl mandoc prometheus python3 python3-yaml \
	debhelper dpkg-dev fakeroot buildah clang libclang-rt-dev llvm iptables iproute2 systemd-container debootstrap \
	golang-go python3-kubernetes haproxy \
	podman runc catatonit
.PHONY: deps
deps: ## apt-get install every build and test dependency (with sudo unless root)
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_PKGS)
