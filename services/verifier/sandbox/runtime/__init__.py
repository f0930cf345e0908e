"""Code that runs *inside* the sandbox. Stdlib only: this folder alone is bound read-only into each sandbox.

The host imports ``frames`` and ``values`` from here too, so both sides speak exactly the same encoding.
"""
