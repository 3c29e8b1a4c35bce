"""Packs: the stream format (`stream`), its record encoding (`records`) and what to send (`plan`).

This layer reads objects from a source and writes bytes; it never writes into a store. Receiving a pack
into a repository is `ctxstore.repo.receive`. docs/protocol.md is the specification.
"""
