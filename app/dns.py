"""The DNS-1123 label, the one pattern for names that become Kubernetes names: run names
(app/settings/run.py: folder names and RayJob names) and the names app/k8s checks."""

# Lowercase alphanumerics and '-', alphanumerics at both ends, at most 63 characters. Unanchored:
# each user anchors it (\A...\Z in Python, ^...$ in a JSON schema).
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
