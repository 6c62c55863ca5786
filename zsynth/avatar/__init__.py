"""The avatar streaming server: WebRTC audio and video of a talking face, driven by a control WebSocket."""
