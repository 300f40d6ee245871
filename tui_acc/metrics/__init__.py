"""Metrics: the kernels (torch and compiled), the engine that computes and caches rows, the
verdicts and the derivation of node rows from tensor rows. Import the modules themselves: this
package imports nothing, so no module of it is half-initialised when another imports it."""
