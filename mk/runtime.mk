# SPDX-License-Identifier: Apache-2.0
# make test-runtime: the deploy artefacts run under real container runtimes (podman, runc), not only read.

##@ Runtime

# tests/runtime/run.sh, in a network namespace of its own: the kubeadm static pod and the Talos
# static pod under `podman kube play` from build/images/kprism.oci.tar, the Talos extension under
# `runc run` from build/images/kprism-talos.oci.tar with the OCI spec Talos would give it
# (tests/runtime/talos_spec.py); each checked against Go stand-in apiservers (checks pass,
# kubectl through kprism, probes, certificate rotation), then broken copies that must fail for
# their reason. Ends "runtime: N passed, M failed". Root; podman and runc from make deps.
.PHONY: test-runtime
## RUNTIME_IMAGES=images: what test-runtime builds first (empty: the images already in build/images, as CI after make test)
RUNTIME_IMAGES ?= images
test-runtime: $(RUNTIME_IMAGES) $(BUILD)/kprism-apiserver ## the static pods under podman kube play, the Talos extension under runc; broken copies fail (root)
	tests/runtime/run.sh
