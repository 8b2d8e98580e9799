"""Warnings this package emits, so users can filter them and tests can assert them."""

from __future__ import annotations


class StreamingWarning(UserWarning):
    """Base class of every warning lance-streaming emits."""


class EpochCompleteWarning(StreamingWarning):
    """An iterator was started on an epoch that was already fully delivered."""


class TableMovedWarning(StreamingWarning):
    """A checkpoint names another table URI than the dataset (tables get copied)."""


class UnownedSplitsWarning(StreamingWarning):
    """A merge found splits that no state owned; their lockstep counts were used."""


class TransformErrorWarning(StreamingWarning):
    """``on_transform_error="warn"`` dropped rows the transform failed on."""


class PackingEstimateWarning(StreamingWarning):
    """``blocks_per_epoch="auto"`` estimated the block budget from a sample."""
