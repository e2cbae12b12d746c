"""Gateway services: pure view/limit logic and the async services the controllers call."""
