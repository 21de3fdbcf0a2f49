"""The seed scenario behind ``unbroken demo``: summarise a quarter of support tickets over ~30
turns with a read-only, an idempotent and a side-effecting tool, crash the run with SIGKILL,
resume it, and check that nothing was lost or done twice.

* ``scenario``: tickets (package data), the three tools, the agent.
* ``script``: the scripted model's answers, generated deterministically.
* ``child``: the agent process (``python -m unbroken.cli.demo.child``).
* ``crash_resume``: the story the ``demo`` command tells, and its checks.
"""
