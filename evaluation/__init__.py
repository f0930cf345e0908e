"""The ruler: the eval runner, its records, the paper's table and the report, over tasks from the registry (tasks/).

Everything here is a *client* of the running services (it sends solves and reads results); no service imports it.
"""
