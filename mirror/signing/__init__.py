"""Signature policy: is an image digest signed, keylessly, by the identity a rule names? Checked with
sigstore-python against what the source registry holds (cosign's bundle referrers and its older `.sig` tags),
before anything of the image is copied."""
