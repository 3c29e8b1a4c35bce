"""The object format: canonical CBOR and value framing (`codec`), the object types (`objects`) and the
sequence tree that commits a revision to its view (`seq`). Pure functions over bytes and values: this
layer knows nothing of stores, refs or repositories. docs/format.md is its specification.
"""
