"""Agents over histories, one module per part: the model protocol (`models`), the Anthropic adapter
(`anthropic`, the only module that imports the SDK), the offline model (`offline`), history strategies
(`strategies`), signals (`signals`), recording into a repository (`recording`) and the agent loop (`loop`).
"""
