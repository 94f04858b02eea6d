"""The backbone: discover and classify devices, plan against a profile, apply, verify, roll back."""
