"""Trainers: what every model uses to learn and to be evaluated, apart from what a model is."""
