"""The search providers the router drives: one module each, behind one protocol.

A provider is an object the router drives, never a place it branches on a
name: it builds a request, reads an answer into an outcome of the reaction
table, normalises a result into Tavily's shape and says what a request cost.
Tavily is the first; each provider's facts live in its module, once.
"""
