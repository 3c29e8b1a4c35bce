"""Conversations in and out of a repository: JSON, JSONL, snapshots and Claude Code transcripts."""
