"""P2TPO (element-level credit for page-level document parsing): its advantage and its element inputs."""
