"""Helpers shipped for testing ferro and code built on it."""

from ferro.testing.gradcheck import gradcheck, gradgradcheck, numerical_jacobian, tolerances

__all__ = ["gradcheck", "gradgradcheck", "numerical_jacobian", "tolerances"]
