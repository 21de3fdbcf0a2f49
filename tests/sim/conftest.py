"""The simulation tier: seeded schedules of the real engine (``unbroken.testing.simulate``)."""
