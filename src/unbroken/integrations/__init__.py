"""Optional bridges to agents people already have: MCP servers, the OpenAI Agents SDK and
LangGraph. Each submodule imports its framework; ``import unbroken`` imports none of them.

* ``unbroken.integrations.mcp``: an MCP server's tools as unbroken tools (extra ``mcp``).
* ``unbroken.integrations.openai_agents``: durable function tools and a ``Session`` for the
  OpenAI Agents SDK (extra ``openai-agents``).
* ``unbroken.integrations.langgraph``: a LangGraph checkpointer on unbroken's stores (extra
  ``langgraph``).
"""
