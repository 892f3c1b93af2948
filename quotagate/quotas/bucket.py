"""The token buckets and a tenant member's pair (token_bucket.py, their one source) in the build that
runs: compiled with the exchange core, or interpreted (quotagate/compiled.py)."""

from __future__ import annotations

from quotagate import compiled

_buckets = compiled.load("quotagate.quotas.token_bucket")
TokenBucket = _buckets.TokenBucket
ShadowTokenBucket = _buckets.ShadowTokenBucket
MemberBucket = _buckets.MemberBucket

__all__ = ["MemberBucket", "ShadowTokenBucket", "TokenBucket"]
