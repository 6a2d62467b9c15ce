"""Imported by the fork server (`common.PRELOAD`) for what importing `dagster` leaves out.

A Dagster instance on disk imports its storage, daemon and workspace modules, and Alembic's
migration scripts, the first time one is opened in a process: 0.4-0.8 CPU-s, which every forked
worker paid again (a chaos `kill9` trial's worker opens one; a third of its CPU). Opening and
closing one throwaway instance here, once, leaves all of that loaded for every child.
"""

from dagster import DagsterInstance

with DagsterInstance.local_temp():
    pass
