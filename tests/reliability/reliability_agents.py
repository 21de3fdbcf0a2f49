"""Where the example agents of the reliability tests live, as ``unbroken chaos --agent`` specs."""

from __future__ import annotations

from pathlib import Path

AGENT = str(Path(__file__).with_name("chaos_agent.py")) + ":make_agent"
FORGETFUL_AGENT = str(Path(__file__).with_name("chaos_agent.py")) + ":make_forgetful_agent"
TASK = "ship order 42"
INVOICE_AGENT = str(Path(__file__).with_name("chaos_agent.py")) + ":make_invoice_agent"
KEYLESS_AGENT = str(Path(__file__).with_name("chaos_agent.py")) + ":make_keyless_agent"
RECEIPT_CHECK = str(Path(__file__).with_name("chaos_agent.py")) + ":receipt_was_sent"
INVOICE_CHECK = str(Path(__file__).with_name("chaos_agent.py")) + ":one_invoice_per_customer"
