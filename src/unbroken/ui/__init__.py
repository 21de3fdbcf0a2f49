"""The run inspector: ``unbroken ui`` (optional extra ``unbroken[ui]``: Starlette and uvicorn).

Hand-written HTML, CSS and JavaScript ship in ``static/``; nothing is built or fetched at run
time. ``views`` shapes what the pages show from the store and ``unbroken.ops`` (messages become
displayable parts in ``unbroken.message_parts``); ``server`` is the web application (reads always
on, actions only when enabled and guarded). ``import unbroken`` never imports this package.
"""
