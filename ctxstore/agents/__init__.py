"""Agents over histories: the model protocol and adapters, the offline model, history strategies,
signals, recording into a repository, and the agent loop.
"""
