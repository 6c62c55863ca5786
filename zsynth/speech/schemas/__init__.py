"""Request and response models shared by the speech front's route modules (a route module never imports another)."""
