"""Drop-ins for agent frameworks: each module plugs a `Repository` in behind one framework's own interface.

Each is an optional extra (`pip install 'ctxstore[langgraph]'`), so the core keeps its dependencies:

- `ctxstore.integrations.langgraph`: `CtxStoreSaver`, a LangGraph checkpointer.
- `ctxstore.integrations.openai_agents`: `CtxStoreSession`, an OpenAI Agents SDK session, and
  `import_sqlite` of an SDK `SQLiteSession` database.
"""
