"""The `invoice-pipeline` command line, a module per role:

    parser.py      the parser (every command, in --help order), main and console
    database.py    db start|stop|status|url, migrate
    vendors.py     vendors list|import, org profile
    process.py     ingest, process (due invoices through the Dagster batch job), sweep
    status.py      status, show, metrics
    dev.py         dev (Dagster and the review page in a process group), samples, demo
    review.py      review list|approve|reject|...|correct|policy, requeue
    layouts.py     review layouts list|show|learn|disable|export|import
    exports.py     export target add|list|disable|enable, export status|run|requeue
    arguments.py   argument types and the --org check; output.py, exit_codes.py, store.py
                   (COMMAND_POOL, the pool a command opens engine.store.open_store with)
                   shared by the commands

`invoice-pipeline` runs `console`; `python -m invoice_pipeline.cli` runs __main__.py.
"""

from invoice_pipeline.cli.parser import console, main

__all__ = ["console", "main"]
