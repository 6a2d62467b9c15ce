"""How the product starts Python children: the installed package, whatever the current folder.

`python -m module` puts the current directory first on `sys.path`. A child started that way
from an old release's checkout imports that folder's `invoice_pipeline` instead of the
installed one (issue 26: every extraction failed with "document sandbox worker did not start").
So every Python child the product starts (the document sandbox workers, `dagster dev`) gets:

- **`-P`** (Python 3.11+): neither the current directory nor the script's folder goes on
  `sys.path`.
- **`PYTHONSAFEPATH=1`** in its environment: the same for the Python processes *it* starts
  (`dagster dev` starts the webserver, the daemon, code servers and run workers with
  `python -m ...`), whatever their working directory.
- **`PYTHONPATH` kept**, with every entry made absolute and empty entries dropped. An operator
  who installs the package, or a plugin, on `PYTHONPATH` still gets children that import it,
  and a relative entry names the same folder as for this process even in a child that runs
  elsewhere. An empty entry is the current folder in disguise (the usual
  `PYTHONPATH=$PYTHONPATH:/x` with the variable unset), which is exactly what `-P` is there to
  keep out.

Not `-I`: it would also ignore `PYTHONPATH` and every other `PYTHON*` variable (and the user
site directory), so a deployment that relies on them would get children that cannot import
the package the parent runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

SAFE_PATH_FLAG = "-P"


def python_command(*args: str) -> list[str]:
    """`python -P ARGS` with this interpreter: `python_command("-m", "pkg.mod", ...)`."""
    return [sys.executable, SAFE_PATH_FLAG, *args]


def child_pythonpath(value: str | None, cwd: str | None = None) -> str | None:
    """PYTHONPATH for a child: entries made absolute (against `cwd`, default this process's
    working directory), empty entries dropped; None when nothing is left."""
    if not value:
        return None
    base = cwd if cwd is not None else os.getcwd()
    entries = [os.path.normpath(os.path.join(base, entry)) for entry in value.split(os.pathsep) if entry]
    return os.pathsep.join(entries) or None


def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a Python child (default: this process's): see the module docstring."""
    env = dict(os.environ if base is None else base)
    env["PYTHONSAFEPATH"] = "1"
    pythonpath = child_pythonpath(env.get("PYTHONPATH"))
    if pythonpath is None:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = pythonpath
    return env
