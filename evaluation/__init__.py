"""The ruler: benchmark loaders, the generated ``sim`` task family, strategies, the eval runner and its report.

Everything here is a *client* of the running services (it sends solves and reads results); no service imports it.
"""
