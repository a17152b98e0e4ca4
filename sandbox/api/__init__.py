"""The API skins (gRPC and REST) over the one service layer. They translate, nothing more."""
