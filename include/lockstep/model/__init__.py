"""The values a checkpoint is made of: partitions and ranges, the checkpoint documents, the committable
and the output contract both writers share, transactional ids, failpoint names. Imports nothing of
Lockstep but ``errors``; no I/O."""
