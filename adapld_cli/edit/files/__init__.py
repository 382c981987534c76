"""The user's files: reading and encoding sources (:mod:`.source`), the race-safe atomic
write (:mod:`.source`), and the undo journal every write of a run goes through
(:mod:`.journal`)."""
