"""The code sandbox: a set of warm bubblewrap sandboxes that run candidate programs and report raw results."""
