"""The notes kept per caller: the files, their layout and the full-text index over them.

Below both the memory skill and the portal sync (which writes synced notes through this
store), so that neither has to import the other's package to reach them. This `__init__`
loads nothing: importing one module of the store loads only what that module needs.
"""
