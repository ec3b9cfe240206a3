"""Training: what ``compile`` / ``fit`` / ``evaluate`` / ``predict`` need beside the model.

- ``compile_state``: the compile state to and from Keras's compile config.
"""
