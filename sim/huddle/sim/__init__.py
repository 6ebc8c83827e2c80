"""Deterministic simulation: the real coordinator core and real member flows under one
seeded clock and network, with faults, and every safety property checked after each step.

from huddle.sim import SimConfig, simulate
"""

from huddle.sim.world import PROTOCOLS, Outcome, SimConfig, simulate

__all__ = ["PROTOCOLS", "Outcome", "SimConfig", "simulate"]
