# SPDX-License-Identifier: Apache-2.0
# Shipping: the static binary, the Talos extension, the OCI images, the systemd units, make install and the Debian package.

##@ Shipping

.PHONY: test-shipping test-systemd test-hardening static test-static talos-extension talos-arm64 test-packaging \
	images test-images install deb test-deb test-systemd-real

# About three minutes on two cores, most of it compiling the static binary and the package.
test-shipping: test-systemd test-static test-hardening test-packaging test-images test-deb test-systemd-real ## the shipping checks: the seven test-* targets below

# The package under a real systemd 252 as PID 1 (tests/systemd/reload.sh): a minimal Debian 12
# tree (debootstrap, cached in build/systemd-root) booted with systemd-nspawn; start, reload,
# rejected reloads, socket activation, certificate rotation, stop. Root; skips without
# debootstrap or systemd-nspawn. About 10 s with the tree cached, 45 s without.
test-systemd-real: deb $(BUILD)/kprism-standin $(BUILD)/kprism-apiserver ## the Debian package under a real systemd as PID 1 in a container: start, reload, rejected reloads, restarts keeping connections and watches, sockets, rotation (root)
	BUILD=$(BUILD) KPRISM_INSTALL=deb tests/systemd/reload.sh

# The systemd units under systemd-analyze, and the unprivileged certificate copy end to end.
test-systemd: $(BUILD)/kprism $(BUILD)/kprism-standin ## systemd-analyze verify/security of the units; the certificate copy end to end
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/systemd_verify.sh
	$(TEST_ENV) tests/packaging/copy_cert.sh

# The hardening flags read back from build/kprism and the static build/static/kprism with readelf
# and nm (PIE, RELRO, BIND_NOW, non-executable stack, stack protector, fortify, CET), after a
# self-test on a trivial program built with and without them; ends "hardening: N passed, M failed".
# test-deb checks the packaged binary the same way.
test-hardening: $(BUILD)/kprism static ## the hardening of build/kprism and build/static/kprism read back (readelf, nm)
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STATIC_BIN=$(abspath build/static/kprism) tests/packaging/hardening.sh

# Fully static, stripped build/static/kprism (Talos extensions; talos-extension/README.md, "The static binary").
static: ## build/static/kprism, fully static and stripped (WITH_SYSTEMD=0 STATIC=1)
	$(MAKE) -j$(NPROC) BUILD=build/static WITH_SYSTEMD=0 STATIC=1 build/static/kprism

# Checks on the static binary (static, runs in an empty chroot, resolves hostnames there with its
# statically linked c-ares) and a subset of the integration suite against it (the Hostname tests among them); ends with "static: N passed, M failed".
test-static: static $(BUILD)/kprism-standin $(BUILD)/tests/integration ## the static binary: alone in an empty chroot, hostnames through c-ares; integration subset
	TEST_SHARDS=$(TEST_SHARDS) KPRISM_STATIC_BIN=$(abspath build/static/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) \
		KPRISM_IT=$(abspath $(BUILD)/tests/integration) tests/static/run.sh

# Talos system extension tree, build/talos-extension/ (manifest.yaml, rootfs/, Containerfile):
# the image content for `buildah bud`/`docker build`, see talos-extension/README.md. The validator
# also checks the static-pod patches (talos-extension/examples/static-pod-*.patch.yaml).
# TALOS_BIN=path uses another binary instead of `make static`'s (for tests only: the validator
# then needs --allow-dynamic for a dynamically linked one).
## TALOS_BIN=build/static/kprism: the binary `make talos-extension` puts in the extension (tests only)
TALOS_BIN ?= build/static/kprism
TALOS_TREE := build/talos-extension
# The static binaries (`make static`, `make static-arm64`): any other TALOS_BIN is for tests only.
STATIC_BINS := build/static/kprism build/arm64-static/kprism
talos-extension: $(if $(filter build/static/kprism,$(TALOS_BIN)),static,$(TALOS_BIN)) ## assemble and validate the Talos extension tree build/talos-extension/
	rm -rf $(TALOS_TREE)
	install -d -m 0755 $(TALOS_TREE)/rootfs/usr/local/lib/containers/kprism \
		$(TALOS_TREE)/rootfs/usr/local/etc/containers
	sed 's|@VERSION@|$(RELEASE)|' talos-extension/manifest.yaml > $(TALOS_TREE)/manifest.yaml
	chmod 0644 $(TALOS_TREE)/manifest.yaml
	install -m 0644 talos-extension/Containerfile $(TALOS_TREE)/Containerfile
	install -m 0644 talos-extension/kprism.yaml $(TALOS_TREE)/rootfs/usr/local/etc/containers/kprism.yaml
	install -m 0755 $(TALOS_BIN) $(TALOS_TREE)/rootfs/usr/local/lib/containers/kprism/kprism
	chmod -R go-w $(TALOS_TREE)
	talos-extension/validate.py $(if $(filter $(STATIC_BINS),$(TALOS_BIN)),,--allow-dynamic) \
		$(foreach r,worker controlplane,--patch $(r) talos-extension/examples/$(r).patch.yaml \
		--patch $(r) talos-extension/examples/$(r)-1.14.patch.yaml \
		--pod-patch $(r) talos-extension/examples/static-pod-$(r).patch.yaml \
		--pod-patch $(r) talos-extension/examples/static-pod-$(r)-1.14.patch.yaml) $(TALOS_TREE)

# Packaging checks: the Talos extension tree, the static pod manifest, `kprism check` on every
# example configuration; ends with "packaging: N passed, M failed".
test-packaging: talos-extension $(BUILD)/kprism ## the Talos extension tree, the static pod manifest, `kprism check` on the examples
	KPRISM_BIN=$(abspath $(BUILD)/kprism) TALOS_TREE=$(abspath $(TALOS_TREE)) \
		TALOS_ALLOW_DYNAMIC=$(if $(filter build/static/kprism,$(TALOS_BIN)),0,1) tests/packaging/run.sh

# The same tree for arm64, build/talos-extension-arm64/, with build/arm64-static/kprism.
talos-arm64: static-arm64 ## the Talos extension tree for arm64, build/talos-extension-arm64/ (make deps-arm64)
	$(MAKE) --no-print-directory talos-extension TALOS_BIN=build/arm64-static/kprism TALOS_TREE=build/talos-extension-arm64

# Both OCI images built with buildah (FROM scratch, no daemon, no registry) into
# build/images/kprism-talos.oci.tar and build/images/kprism.oci.tar, and their content checked.
# Each is an image index naming every platform of IMAGE_PLATFORMS, one image per platform built
# from that platform's static binary and extension tree (arm64: `make deps-arm64` first).
## IMAGE_PLATFORMS=linux/amd64 linux/arm64: the platforms the images are built for (default: linux/arm64 too once `make deps-arm64` installed the cross g++)
IMAGE_PLATFORMS ?= linux/amd64 $(if $(shell command -v aarch64-linux-gnu-g++ 2>/dev/null),linux/arm64)
images test-images: talos-extension $(if $(filter linux/arm64,$(IMAGE_PLATFORMS)),talos-arm64) ## both OCI images built with buildah into build/images/, for every platform of IMAGE_PLATFORMS; their content checked
	IMAGE_PLATFORMS='$(IMAGE_PLATFORMS)' tests/packaging/images.sh

SYSTEMD_UNITS := kprism.service kprism.socket kprism-admin.socket kprism-cert.path kprism-cert.service
install: $(BUILD)/kprism ## binary, man pages, example, discovery RBAC, systemd units (PREFIX, DESTDIR, SYSTEMDUNITDIR)
	install -D -m 0755 $(BUILD)/kprism $(DESTDIR)$(PREFIX)/bin/kprism
	install -D -m 0644 man/kprism.8 $(DESTDIR)$(PREFIX)/share/man/man8/kprism.8
	install -D -m 0644 man/kprism.toml.5 $(DESTDIR)$(PREFIX)/share/man/man5/kprism.toml.5
	install -D -m 0644 packaging/kprism.toml.example $(DESTDIR)$(PREFIX)/share/doc/kprism/kprism.toml.example
	install -D -m 0644 packaging/kubernetes/kprism-discovery-rbac.yaml \
		$(DESTDIR)$(PREFIX)/share/kprism/kprism-discovery-rbac.yaml
	install -D -m 0755 packaging/systemd/kprism-copy-cert $(DESTDIR)$(PREFIX)/lib/kprism/kprism-copy-cert
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	for u in $(SYSTEMD_UNITS); do \
		sed -e 's|/usr/bin/kprism|$(PREFIX)/bin/kprism|g' -e 's|/usr/lib/kprism/|$(PREFIX)/lib/kprism/|g' \
			packaging/systemd/$$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; \
	done

# The Debian package (packaging/debian): dpkg-buildpackage -us -uc -b in a staged copy of the
# tree's tracked and untracked, not ignored files, build/deb/kprism-$(DEB_VERSION)/, with
# packaging/debian as debian/; the .deb lands in build/. test-deb checks its contents and runs the
# extracted binary; test-man checks the man pages against --help and `check` (part of `test`).
DEB_VERSION := $(shell dpkg-parsechangelog -l packaging/debian/changelog -S Version 2>/dev/null | sed 's/-[^-]*$$//')
DEB_STAGE := build/deb/kprism-$(DEB_VERSION)
deb: ## the Debian package build/kprism_VERSION-1_ARCH.deb (dpkg-buildpackage)
	rm -rf build/deb && mkdir -p $(DEB_STAGE)
	git ls-files -z --cached --others --exclude-standard | \
		xargs -0 sh -c 'for f; do [ -f "$$f" ] && printf "%s\0" "$$f"; done; true' sh | \
		tar --null -T - -cf - | tar -xf - -C $(DEB_STAGE)
	rm -rf $(DEB_STAGE)/debian && cp -a packaging/debian $(DEB_STAGE)/debian
	cd $(DEB_STAGE) && dpkg-buildpackage -us -uc -b -jauto
	rm -f build/kprism_*.deb build/kprism-dbgsym_*.deb build/kprism_*.buildinfo build/kprism_*.changes
	for f in build/deb/kprism_* build/deb/kprism-dbgsym_*; do [ ! -e "$$f" ] || mv "$$f" build/; done
	@ls build/kprism_*.deb

test-deb: deb ## build the package and check its files, conffile, binary and units
	tests/packaging/deb_check.sh build/kprism_$(DEB_VERSION)-*.deb
