"""Telling the people on call what a run did: `events.py` (what is worth a message), `channels.py` (each
platform's post and signature), `send.py` (bounded, retried, never failing the run)."""
