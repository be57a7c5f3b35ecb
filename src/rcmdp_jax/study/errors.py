"""The exceptions the study's modules share; the command line reports each in one line,
exit status 2 (one module, so that the modules that raise them import no one above them)."""

from __future__ import annotations


class PlanError(ValueError):
    """An input the plan refuses (the message names the option and the allowed values);
    the command line reports it in one line, exit status 2, nothing written."""


class RunFolderError(ValueError):
    """A run folder this command cannot use (not a run folder, an edited ``run.json``, in
    use by another run, not writable); the command line reports it in one line, exit
    status 2."""
