"""The code sandbox: a pool of warm bubblewrap sandboxes that run candidate programs and report raw results."""
