"""The hardened HTTP serving layer both servers run on: the leaderboard (web/) and the reward server
(integrations/reward_*). One rule for each of: connection caps and header timeouts (protocol.py), request
bodies under a limit and a deadline, checked before they are read (limits.py), the token (auth.py), and the
parsing of untrusted JSON (jsonbody.py)."""
