# SPDX-License-Identifier: Apache-2.0
# Turns packaging/kprism.toml.example into the package's /etc/kprism/kprism.toml: kprism.service
# runs as a dynamic user and reads the copy kprism-copy-cert makes of the kubelet's root-only
# client certificate (packaging/systemd/README.md).
/^client_cert = /i\
# Under kprism.service (systemd, dynamic user): the copy of the kubelet's\
# kubelet-client-current.pem that kprism-copy-cert keeps in /run/kprism, refreshed on every\
# rotation by kprism-cert.path (/usr/share/doc/kprism/README.systemd.md).
s#^\(client_\(cert\|key\) = \)"/var/lib/kubelet/pki/kubelet-client-current.pem"#\1"/run/kprism/kubelet-client.pem"#
