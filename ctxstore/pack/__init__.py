"""Packs: the stream format (`stream`), its record encoding (`records`), staging a received pack whole
and checking what it connects to (`staging`), and what to send (`plan`).

This layer reads objects from a source and writes bytes; it never writes into a store. Receiving a pack
into a repository is `ctxstore.repo.receive`. docs/protocol.md is the specification.
"""
