"""SIP bridge: answer phone calls (SIP/RTP G.711, RFC 4733 DTMF) and Asterisk AudioSocket
connections, each one a session on the shared stage processes. `docs/sip.md` explains."""
