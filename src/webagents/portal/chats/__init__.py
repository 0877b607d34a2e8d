"""Chats (P9, P11): a portal user's conversations with their agents, recorded by the agent's
session skill and shown on the owner's chat pages."""
